"""Training on one worker (no sync strategy): the baseline trial, or a placed model trained for real.

With a real cluster the clock is the wall clock (evaluation excluded); with a simulated cluster the
gradients are still real but each update takes the simulated step time on a virtual clock."""

from __future__ import annotations

import time

from orchestrator.execution.training import BatchSampler, ConvergenceTracker, TrainContext, TrainResult
from orchestrator.progress import Bar


def train_single_worker(ctx: TrainContext, runtime, *, virtual_step_time_s: float | None = None) -> TrainResult:
    s, data = ctx.settings, ctx.dataset
    sampler = BatchSampler(len(data.x_train), s.seed)
    x_eval, y_eval = data.x_test, data.y_test
    if s.eval_samples:
        x_eval, y_eval = x_eval[: s.eval_samples], y_eval[: s.eval_samples]
    bar = Bar(ctx.show_progress, s.budget_updates, "training", "update")
    tracker = ConvergenceTracker(s, ctx.sink, lambda p: bar.update(0, acc=f"{p.accuracy:.4f}"))
    runtime.set_lr(s.lr)
    warm = sampler.next(s.batch_size)
    runtime.warm_up(data.x_train[warm], data.y_train[warm])
    step_fn = runtime.train_step
    if not s.optimizer_settings().is_plain_sgd:   # train.optimizer: the flat update rule both sync runtimes use
        runtime.gradient(data.x_train[warm], data.y_train[warm])     # traced before the clock starts
        rule, theta = s.new_optimizer(), runtime.get_flat()

        def step_fn(x, y):
            nonlocal theta
            loss, grad = runtime.gradient(x, y)
            theta = rule.step(theta, grad, s.lr)
            runtime.set_flat(theta)
            return loss
    sampler = BatchSampler(len(data.x_train), s.seed)
    elapsed, step, losses = 0.0, 0, []
    try:
        while not tracker.should_stop(step, elapsed):
            idx = sampler.next(s.batch_size)
            t0 = time.perf_counter()
            losses.append(step_fn(data.x_train[idx], data.y_train[idx]))
            step += 1
            elapsed += virtual_step_time_s if virtual_step_time_s is not None else time.perf_counter() - t0
            bar.update(1)
            if step % s.eval_every == 0 or tracker.budget_spent(step, elapsed):
                _, acc = runtime.evaluate(x_eval, y_eval)
                tracker.record(step, elapsed, sum(losses) / len(losses), acc)
                losses.clear()
    finally:
        bar.close()
    clock = "virtual" if virtual_step_time_s is not None else "wall"
    return tracker.result(step, elapsed, step * s.batch_size, clock)
