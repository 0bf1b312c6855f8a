# clang -target bpf -> .bpf.o -> bpftool gen skeleton, as libbpf-bootstrap does.
find_program(BPF_CLANG NAMES clang clang-14 REQUIRED)
find_program(BPFTOOL NAMES bpftool PATHS /usr/sbin /usr/local/sbin REQUIRED)

# The BPF target arch: selects libbpf's PT_REGS_* and src/common/arch.bpf.h (the only BPF code that
# names registers). x86 is what is built and tested; arm64 compiles but is untested.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  set(_gs_bpf_arch_default arm64)
else()
  set(_gs_bpf_arch_default x86)
endif()
set(GPUSCOPE_BPF_ARCH ${_gs_bpf_arch_default} CACHE STRING "BPF __TARGET_ARCH_<arch> (x86, arm64)")

set(GPUSCOPE_GEN_DIR ${CMAKE_BINARY_DIR}/generated)
set(GPUSCOPE_BPF_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})
file(MAKE_DIRECTORY ${GPUSCOPE_GEN_DIR})
# -DGPUSCOPE_BPF_PREBUILT=DIR: the NAME.skel.h files that another build of this tree generated (its
# generated/ folder) are copied, not built: this build has no clang -target bpf rule at all. The
# ASAN build takes the release build's (scripts/test-asan.sh): the sanitizer does not apply to BPF
# objects, and compiling them twice doubled the chances of clang crashing on one.
set(GPUSCOPE_BPF_PREBUILT "" CACHE PATH "generated/ folder of a build whose BPF skeletons this build copies")
if(GPUSCOPE_BPF_PREBUILT)
  get_filename_component(_gs_prebuilt ${GPUSCOPE_BPF_PREBUILT} REALPATH)
  get_filename_component(_gs_gen ${GPUSCOPE_GEN_DIR} REALPATH)
  if(_gs_prebuilt STREQUAL _gs_gen)
    message(FATAL_ERROR "GPUSCOPE_BPF_PREBUILT names this build's own ${GPUSCOPE_GEN_DIR}")
  endif()
endif()
# Every skeleton of this build: what a build with GPUSCOPE_BPF_PREBUILT needs built first.
add_custom_target(bpf_skels)
if(NOT GPUSCOPE_BPF_PREBUILT)
  set(VMLINUX_BTF /sys/kernel/btf/vmlinux CACHE FILEPATH "BTF used to generate vmlinux.h")
  add_custom_command(
    OUTPUT ${GPUSCOPE_GEN_DIR}/vmlinux.h
    COMMAND ${BPFTOOL} btf dump file ${VMLINUX_BTF} format c > ${GPUSCOPE_GEN_DIR}/vmlinux.h
    COMMENT "Generating vmlinux.h from ${VMLINUX_BTF}")
  add_custom_target(vmlinux_h DEPENDS ${GPUSCOPE_GEN_DIR}/vmlinux.h)
endif()

# gpuscope_bpf(NAME SOURCE): builds NAME.bpf.o and NAME.skel.h (or copies NAME.skel.h from
# GPUSCOPE_BPF_PREBUILT); adds target NAME_skel.
# Header dependencies come from clang itself (-MD -MF NAME.bpf.d, read through DEPFILE), which every
# generator honours (Makefiles and Ninja alike, CMake >= 3.20): touching src/common/*.h or any header
# a .bpf.c includes rebuilds its object and skeleton.
function(gpuscope_bpf name src)
  set(obj ${GPUSCOPE_GEN_DIR}/${name}.bpf.o)
  set(dep ${GPUSCOPE_GEN_DIR}/${name}.bpf.d)
  set(skel ${GPUSCOPE_GEN_DIR}/${name}.skel.h)
  if(GPUSCOPE_BPF_PREBUILT)
    set(pre ${GPUSCOPE_BPF_PREBUILT}/${name}.skel.h)
    if(NOT EXISTS ${pre})
      message(FATAL_ERROR "GPUSCOPE_BPF_PREBUILT: ${pre} is missing; build target bpf_skels in that build first")
    endif()
    add_custom_command(
      OUTPUT ${skel}
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${pre} ${skel}
      DEPENDS ${pre}
      COMMENT "Skeleton ${name} (from ${GPUSCOPE_BPF_PREBUILT})")
    add_custom_target(${name}_skel DEPENDS ${skel})
    return()
  endif()
  get_filename_component(abs ${src} ABSOLUTE)
  get_filename_component(dir ${abs} DIRECTORY)
  add_custom_command(
    OUTPUT ${obj}
    COMMAND sh ${GPUSCOPE_BPF_CMAKE_DIR}/retry_crash.sh ${BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_${GPUSCOPE_BPF_ARCH} -Wall -Wno-unused-function
            -I${GPUSCOPE_GEN_DIR} -I${PROJECT_SOURCE_DIR}/src -I${dir} -MD -MF ${dep} -MT ${obj}
            -c ${abs} -o ${obj}
    DEPENDS ${abs} ${GPUSCOPE_GEN_DIR}/vmlinux.h
    DEPFILE ${dep}
    COMMENT "BPF ${name}")
  add_custom_command(
    OUTPUT ${skel}
    COMMAND ${BPFTOOL} gen skeleton ${obj} name ${name}_bpf > ${skel}
    DEPENDS ${obj}
    COMMENT "Skeleton ${name}")
  add_custom_target(${name}_skel DEPENDS ${skel})
  add_dependencies(bpf_skels ${name}_skel)
endfunction()
