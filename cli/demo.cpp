// foundry demo: a short tour of tensors and autograd (the README's main job until training lands).
#include <cstdio>

#include "commands.h"
#include "foundry/autograd/autograd.h"
#include "foundry/ops/ops.h"

namespace foundry::cli {

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo", "Fit a tiny MLP with autograd and print the losses");
  cmd->callback([] {
    manual_seed(0);
    // y = sin(3x) on [-1, 1], a 1-32-1 tanh MLP, plain gradient descent.
    Tensor x = linspace(-1.0, 1.0, 64).unsqueeze(1);
    Tensor y = sin(x * Scalar(3.0));
    Tensor w1 = (randn({1, 32}) * Scalar(1.0)).requires_grad_();
    Tensor b1 = zeros({32}).requires_grad_();
    Tensor w2 = (randn({32, 1}) * Scalar(0.2)).requires_grad_();
    Tensor b2 = zeros({1}).requires_grad_();
    std::printf("fitting y = sin(3x) with a 1-32-1 tanh MLP\n");
    for (int step = 0; step <= 2000; ++step) {
      Tensor h = tanh(matmul(x, w1) + b1);
      Tensor pred = matmul(h, w2) + b2;
      Tensor loss = mse_loss(pred, y);
      for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
      loss.backward();
      {
        autograd::NoGradGuard ng;
        for (Tensor* p : {&w1, &b1, &w2, &b2}) p->add_(p->grad(), -0.2);
      }
      if (step % 400 == 0) std::printf("step %4d  loss %.6f\n", step, loss.item<double>());
    }
    Tensor probe = tensor<float>({0.5f}, {1, 1});
    Tensor out = matmul(tanh(matmul(probe, w1) + b1), w2) + b2;
    std::printf("f(0.5) = %.4f (sin(1.5) = %.4f)\n", out.item<double>(), std::sin(1.5));
  });
}

}  // namespace foundry::cli
