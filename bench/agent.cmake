# The agent's scrape cost at 10k series (docs/agent.md), and a smoke run of it.
add_executable(agent_bench ${PROJECT_SOURCE_DIR}/bench/agent_bench.cpp)
target_link_libraries(agent_bench PRIVATE gpuscope_agent_command gpuscope_kernels_agent_collector -static-libstdc++ -static-libgcc)
add_test(NAME bench_smoke_agent COMMAND agent_bench --pids 10 --kernels 10 --rounds 2)
