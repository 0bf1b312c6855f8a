# Containers and pods: the filters, columns and fields on a real cgroup v2 tree.
gstest_integration(scoping_test 180 DEPS standin_app)
