"""``libreyolo.kernels.autograd``: the C-level ``apply`` and the cheaper ``once_differentiable``
behave as torch's own in every case torch's Python handles (dead functorch wrappers, functorch
transforms, ``setup_context``, a second differentiation)."""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels import autograd


class Doubling(torch.autograd.Function):
    """y = 2x, with a non-tensor first argument as the providers' plans are."""

    @staticmethod
    def forward(ctx, plan, x):
        return x * 2

    @staticmethod
    @autograd.once_differentiable
    def backward(ctx, grad):
        return None, grad * 2


class WithSetupContext(torch.autograd.Function):
    @staticmethod
    def forward(plan, x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return None, grad * 2


def test_the_c_apply_builds_the_same_graph_and_gradient_as_function_apply():
    x = torch.randn(5, requires_grad=True)
    apply = autograd.applier(Doubling)
    assert apply is not Doubling.apply
    out = apply("plan", x)
    assert type(out.grad_fn) is type(Doubling.apply("plan", x).grad_fn)
    out.backward(torch.arange(5.0))
    torch.testing.assert_close(x.grad, 2 * torch.arange(5.0), rtol=0, atol=0)


def test_a_dead_functorch_wrapper_is_unwrapped_as_function_apply_unwraps_it():
    """A tensor kept from inside ``torch.func.grad`` outlives its level: ``Function.apply``
    unwraps it (no graph is built on it); the bare C apply would record a graph on the dead
    wrapper instead."""
    leaked = []

    def loss(x):
        leaked.append(x * 1)
        return x.sum()

    torch.func.grad(loss)(torch.randn(3))
    dead = leaked[0]
    expected = Doubling.apply("plan", dead)
    out = autograd.applier(Doubling)("plan", dead)
    assert out.requires_grad is expected.requires_grad is False
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_under_a_functorch_transform_the_call_is_function_apply():
    """Function.apply's own answer (these Functions define no ``setup_context``: an error)."""
    apply = autograd.applier(Doubling)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: Doubling.apply("plan", x).sum())(torch.randn(3))
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: apply("plan", x).sum())(torch.randn(3))


def test_a_function_with_setup_context_keeps_function_apply():
    assert autograd.applier(WithSetupContext) == WithSetupContext.apply


@pytest.mark.parametrize("decorator", [torch.autograd.function.once_differentiable,
                                       autograd.once_differentiable],
                         ids=["torch", "ours"])
def test_differentiating_the_backward_again_raises(decorator):
    """With ``create_graph=True`` and a gradient that requires grad, the backward's outputs are
    marked so that a second differentiation raises, as torch's decorator marks them (a backward
    made of kernels autograd cannot see must never give silent zeros)."""

    class Once(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @decorator
        def backward(ctx, grad):
            return grad * 2

    x, v = torch.randn(3, requires_grad=True), torch.ones(3, requires_grad=True)
    (g,) = torch.autograd.grad(Once.apply(x), x, grad_outputs=v, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


def test_a_plain_backward_runs_without_entering_no_grad(monkeypatch):
    """Grad mode is already off in a backward not asked to create a graph: the decorator calls
    it as it is (torch's enters ``no_grad`` every time)."""
    entered = []
    original = torch.autograd.function.once_differentiable

    def counting(fn):
        guarded = original(fn)
        return lambda ctx, *grads: entered.append(1) or guarded(ctx, *grads)

    monkeypatch.setattr(torch.autograd.function, "once_differentiable", counting)

    class Once(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @autograd.once_differentiable
        def backward(ctx, grad):
            return grad * 2

    x = torch.randn(3, requires_grad=True)
    Once.apply(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0), rtol=0, atol=0)
    assert entered == []
    x.grad = None
    v = torch.ones(3, requires_grad=True)
    torch.autograd.grad(Once.apply(x), x, grad_outputs=v, create_graph=True)
    assert entered == [1]
