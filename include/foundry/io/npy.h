// NumPy .npy and .npz files (format version 1.0/2.0/3.0), compatible with numpy.save/load and
// numpy.savez/savez_compressed. Writes are atomic (temporary file + rename).
#pragma once

#include <map>
#include <string>

#include "foundry/core/tensor.h"
#include "foundry/io/atomic_file.h"  // write_file_atomic, read_file (used with npy by callers)

namespace foundry::io {

/// Reads one .npy file (little- or big-endian, C or Fortran order). Throws IOError with the file
/// name and the problem for truncated or malformed files and unsupported dtypes.
Tensor load_npy(const std::string& path);
/// Parses .npy bytes (`what` names the source in error messages).
Tensor parse_npy(const std::string& bytes, const std::string& what);
/// Writes a tensor as .npy (bfloat16/float8 have no NumPy dtype and are rejected).
void save_npy(const std::string& path, const Tensor& t);
std::string encode_npy(const Tensor& t);

/// Reads every array of an .npz archive (stored or deflated entries).
std::map<std::string, Tensor> load_npz(const std::string& path);
/// Writes arrays as an uncompressed .npz (as numpy.savez), atomically.
void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays);

}  // namespace foundry::io
