// The list of op families. Each family file defines its entries in one register function.
#include "foundry/ops/registry.h"

namespace foundry::ops {

void register_view_ops(Registry& r);
void register_creation_ops(Registry& r);
void register_unary_ops(Registry& r);
void register_binary_ops(Registry& r);
void register_reduce_ops(Registry& r);
void register_scan_ops(Registry& r);
void register_shape_ops(Registry& r);
void register_indexing_ops(Registry& r);
void register_sort_ops(Registry& r);
void register_random_ops(Registry& r);
void register_loss_ops(Registry& r);
void register_nn_ops(Registry& r);
void register_linalg_ops(Registry& r);

void register_all_ops(Registry& r) {
  register_view_ops(r);
  register_creation_ops(r);
  register_unary_ops(r);
  register_binary_ops(r);
  register_reduce_ops(r);
  register_scan_ops(r);
  register_shape_ops(r);
  register_indexing_ops(r);
  register_sort_ops(r);
  register_random_ops(r);
  register_loss_ops(r);
  register_nn_ops(r);
  register_linalg_ops(r);
}

}  // namespace foundry::ops
