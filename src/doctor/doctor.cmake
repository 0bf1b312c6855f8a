# gpuscope doctor: what this host supports and which subcommands will work (docs/doctor.md).
gpuscope_command(doctor SOURCES ${CMAKE_CURRENT_LIST_DIR}/doctor.cpp ${CMAKE_CURRENT_LIST_DIR}/doctor_register.cpp
  LIBS gpuscope_core gpuscope_agent)
