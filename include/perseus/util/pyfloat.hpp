#pragma once
// Python's float floor division, reproduced bit for bit. The reference planner quantizes
// times and rounds flow bounds with `a // b`, which is not floor(a / b) in every case.
namespace perseus {

double py_floordiv(double a, double b);

}  // namespace perseus
