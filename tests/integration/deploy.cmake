# deploy/: the alert and recording rules under promtool, the Kubernetes manifests against the API schemas
# (offline, tests/deploy/node_modules from scripts/deps.sh), the systemd unit under
# systemd-analyze, and the agent's anomaly rules, governor and the metric names that dashboards
# and rules use, against real scrapes (deploy_test).
set(GS_DEPLOY ${PROJECT_SOURCE_DIR}/deploy)
add_test(NAME deploy_rules_check COMMAND promtool check rules ${GS_DEPLOY}/prometheus/rules.yml
  ${GS_DEPLOY}/prometheus/compat_rules.yml)
add_test(NAME deploy_rules_unit COMMAND promtool test rules rules_test.yml compat_rules_test.yml
  WORKING_DIRECTORY ${GS_DEPLOY}/prometheus)
# deploy/ and docs/deploy.md agree (files, dashboards, runbook anchors); set-runbook-base.sh on a copy.
add_test(NAME deploy_docs COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/deploy/deploy_docs.py ${PROJECT_SOURCE_DIR})
add_test(NAME deploy_runbook_base COMMAND bash ${PROJECT_SOURCE_DIR}/tests/deploy/runbook_base.sh)
add_test(NAME deploy_k8s_schema COMMAND node ${PROJECT_SOURCE_DIR}/tests/deploy/validate_k8s.js
  ${GS_DEPLOY}/k8s/daemonset.yaml ${GS_DEPLOY}/k8s/service.yaml ${GS_DEPLOY}/k8s/monitoring.yaml)
add_test(NAME deploy_k8s_negative COMMAND bash ${PROJECT_SOURCE_DIR}/tests/deploy/k8s_negative.sh)
# systemd-analyze verify wants ExecStart's binary to exist: the built one stands in for /usr/local/bin's.
add_test(NAME deploy_systemd_verify COMMAND sh -c
  "d=$(mktemp -d) && sed 's#/usr/local/bin/gpuscope#$<TARGET_FILE:gpuscope>#' ${GS_DEPLOY}/systemd/gpuscope-agent.service > $d/gpuscope-agent.service && systemd-analyze verify $d/gpuscope-agent.service; r=$?; rm -rf $d; exit $r")
set_tests_properties(deploy_systemd_verify PROPERTIES FAIL_REGULAR_EXPRESSION "[^ ]")

gstest_integration(deploy_test 180 DEFS NVML_STANDIN="$<TARGET_FILE:nvml_standin>"
  DEPLOY_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DEPS standin_app nvml_standin)

add_executable(governor_test ${PROJECT_SOURCE_DIR}/tests/unit/governor_test.cpp)
target_link_libraries(governor_test PRIVATE gpuscope_agent GTest::gtest_main)
gtest_discover_tests(governor_test)
