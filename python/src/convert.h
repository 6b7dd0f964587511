// Conversions between Python objects and Foundry values (tensors, NumPy arrays, indices).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "foundry/core/tensor.h"
#include "foundry/ops/registry.h"

namespace foundry::nn {
class Module;
}

namespace foundry::python {

namespace py = pybind11;

/// A tensor sharing the array's memory (any strides, negative too); the array stays alive as
/// long as the tensor does. Read-only arrays give read-only storage.
Tensor from_numpy(py::array arr);
/// A NumPy view of the tensor's memory (bfloat16 and float8 become float32 copies).
py::array to_numpy(const Tensor& t);
/// torch.tensor semantics: copies; Python floats become the default float, ints int64.
Tensor tensor_from(py::handle obj, std::optional<DType> dtype);
/// A value for a schema parameter (Python numbers for Tensor parameters become wrapped numbers).
ops::Value value_from(py::handle obj, const ops::Param& param, const std::string& op);
/// NumPy-style index expression -> TensorIndex list.
std::vector<TensorIndex> index_from(py::handle obj);
/// dtype from a foundry dtype, a string name, or a NumPy dtype.
DType dtype_from(py::handle obj);
/// Token ids (or a mask, labels) as an int64 batch [B, T]: a 1-D input becomes one row; None undefined.
Tensor batch_of(py::object obj);
/// Named tensors (nn::NamedTensors) as a Python dict (name -> the same tensor).
py::dict dict_of(const std::vector<std::pair<std::string, Tensor>>& tensors);
/// module.state_dict() as a Python dict (name -> tensor sharing the module's storage).
py::dict state_dict_of(const nn::Module& module);

}  // namespace foundry::python
