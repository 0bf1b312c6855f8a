# gpuscope errors: a saved kernel log replayed, the stand-in's sticky error after named kernels,
# the two joined, bad input, and the real libcudart without a GPU.
gstest_integration(errors_test 90 DEPS standin_app cuda_fixtures)
