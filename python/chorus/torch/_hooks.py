"""What both DistributedOptimizers' Python hooks share (optimizer.py, adasum_optimizer.py)."""

# Horovod's words when a gradient arrives again before its reduction started.
TOO_MANY_BACKWARD_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before call to step(). "
    "Increase backward_passes_per_step to accumulate gradients locally.")


def hook_accumulator(p, hook):
    """Runs hook() each time autograd has accumulated p's gradient; returns the accumulator,
    which the caller keeps (the hook lives as long as it)."""
    accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
    accumulator.register_hook(hook)
    return accumulator
