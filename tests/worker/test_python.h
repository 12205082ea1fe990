// The Python of the LibTorch tests' independent references (PyTorch,
// safetensors, transformers): $TRAINYARD_TEST_PYTHON, else the one CMake was
// given as TRAINYARD_PYTHON (the TRAINYARD_TEST_PYTHON definition of the
// test programs).
#ifndef TRAINYARD_TESTS_WORKER_TEST_PYTHON_H_
#define TRAINYARD_TESTS_WORKER_TEST_PYTHON_H_

#include <cstdlib>
#include <string>

namespace trainyard {

inline std::string TestPython() {
  const char* p = std::getenv("TRAINYARD_TEST_PYTHON");
  return p != nullptr ? p : TRAINYARD_TEST_PYTHON;
}

}  // namespace trainyard

#endif  // TRAINYARD_TESTS_WORKER_TEST_PYTHON_H_
