"""SyncBatchNorm: batch normalization with statistics over the whole global batch.

In training, each rank's batch sum, sum of squares and count are summed over the ranks of
``process_set`` with one allreduce, and every rank normalizes with the global mean and
variance. The allreduce is differentiable (its gradient is the same sum of the
gradients), so autograd's backward reaches every rank's inputs through the global
statistics. In eval mode, or on one rank, it is plain batch normalization.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from chorus.torch.ops import Sum, allreduce, size
from chorus.torch.process_sets import global_process_set


class SyncBatchNorm(_BatchNorm):
    """Horovod's (and torch's) SyncBatchNorm over chorus: a drop-in for BatchNorm1d/2d/3d."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _average_factor(self):
        if not (self.training and self.track_running_stats):
            return 0.0
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or size() == 1 or not self.process_set.included():
            return super().forward(input)
        factor = self._average_factor()
        channels = input.shape[1]
        flat = input.transpose(0, 1).reshape(channels, -1)  # channel-major
        count = torch.full((1,), float(flat.shape[1]), dtype=flat.dtype)
        stats = torch.cat([flat.sum(1), (flat * flat).sum(1), count])
        stats = allreduce(stats, op=Sum, name=None, process_set=self.process_set)
        n = stats[-1]
        mean = stats[:channels] / n
        var = stats[channels:2 * channels] / n - mean * mean
        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
                self.running_var.mul_(1 - factor).add_(unbiased.detach() * factor)
        shape = [1, channels] + [1] * (input.dim() - 2)
        out = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
