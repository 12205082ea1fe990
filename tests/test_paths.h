// Where a test program finds the checkout, the build directory and trainctl.
// CMake writes them into one generated file (build/tests/test_paths.cc, the
// library trainyard_test_paths), not onto every test's command line, so that
// the tests' own files compile the same in every clone and a new clone
// takes them from ccache.
#ifndef TRAINYARD_TESTS_TEST_PATHS_H_
#define TRAINYARD_TESTS_TEST_PATHS_H_

namespace trainyard::test_paths {
extern const char* const kSourceDir;  // the checkout
extern const char* const kBinaryDir;  // the build directory
extern const char* const kTrainctl;   // the trainctl program of this build
}  // namespace trainyard::test_paths

#define TRAINYARD_SOURCE_DIR (::trainyard::test_paths::kSourceDir)
#define TRAINYARD_BINARY_DIR (::trainyard::test_paths::kBinaryDir)
#define TRAINCTL_BINARY (::trainyard::test_paths::kTrainctl)

#endif  // TRAINYARD_TESTS_TEST_PATHS_H_
