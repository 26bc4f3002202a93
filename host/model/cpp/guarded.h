// The shims' one way out: a call returns 0, or writes the C++ error's text into `err` (at most
// `len` bytes, NUL-terminated) and returns 1. Nothing throws across the boundary.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>

template <typename F>
int guarded(char* err, size_t len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    if (len > 0) {
      std::strncpy(err, e.what(), len - 1);
      err[len - 1] = '\0';
    }
    return 1;
  }
}
