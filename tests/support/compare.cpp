#include "tests/support/compare.h"

#include <algorithm>
#include <cmath>

namespace spw {

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b, size_t* worst) {
  double mb = 0, md = 0;
  size_t w = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    mb = std::max(mb, std::fabs(static_cast<double>(b[i])));
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (d > md) {
      md = d;
      w = i;
    }
  }
  if (worst) *worst = w;
  return mb > 0 ? md / mb : md;
}

}  // namespace spw
