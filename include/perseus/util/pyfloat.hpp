#pragma once
#include <string>
// Python's float floor division, reproduced bit for bit. The reference planner quantizes
// times and rounds flow bounds with `a // b`, which is not floor(a / b) in every case.
namespace perseus {

double py_floordiv(double a, double b);

// Like Python's repr(float): shortest round-trip digits, '.0' on integral values.
std::string python_float(double value);

}  // namespace perseus
