// Error measures for comparing a fast path with its reference.
#pragma once

#include <cstddef>
#include <vector>

namespace spw {

/// Normalised mean squared error sum((a-b)^2) / sum(b^2) (llama.cpp's test-backend-ops
/// measure); b is the reference. Compares the common prefix of the two vectors.
double nmse(const std::vector<float>& a, const std::vector<float>& b);

/// max|a - b| / max|b| (b the reference); *worst, when given, receives the index of the
/// largest difference.
double rel_err(const std::vector<float>& a, const std::vector<float>& b, size_t* worst = nullptr);

}  // namespace spw
