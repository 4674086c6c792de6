"""Steps: the named side effects of one job (charge the card, then send the
receipt), each recorded once under the job's token, so that a successor
that takes the job over skips those that finished."""

import hashlib
from typing import TYPE_CHECKING, Any, Callable

from ._types import Step, StepState

if TYPE_CHECKING:  # pragma: no cover
    from ._do import Attempt

__all__ = ["step_key", "run_step"]

#: What a step's key starts with.
STEP_KEY_PREFIX = "idem-"


def step_key(namespace: str, key: str, step: str) -> str:
    """The idempotency key of one step of the job (namespace, key) for a
    downstream API: "idem-" and the lowercase hex SHA-256 of namespace, a
    zero byte, key, a zero byte and step (UTF-8). Every SDK derives the
    same one, on every attempt of the job, so a downstream that dedupes by
    it performs the step once even when a successor runs it again."""
    data = "\0".join((namespace, key, step)).encode("utf-8")
    return STEP_KEY_PREFIX + hashlib.sha256(data).hexdigest()


def run_step(attempt: "Attempt", name: str, fn: Callable[[str], Any]) -> bytes:
    """attempt.step(name, fn): the result of a FINISHED step without calling
    fn; otherwise StartStep, fn(step_key), CompleteStep with fn's value as
    bytes, and that value. A refused call raises its typed error, and then
    fn's value is not returned as if it were recorded."""
    from ._do import _encode

    client, namespace, key = attempt._client, attempt._namespace, attempt._key
    if client is None:
        raise RuntimeError("idem: attempt.step() works in the handler of do() or do_batch(), where the attempt "
                           "holds a job")
    if not callable(fn):
        raise TypeError(f"idem: step({name!r}, fn): fn must be a function of the step key, not {type(fn).__name__}")
    done = attempt.steps.get(name)
    if done is not None and done.state == StepState.FINISHED:
        return done.result
    # A lease already lost makes every step call refused: say so before the
    # effect rather than after it.
    attempt.check()
    attempt._keep_step(client.start_step(namespace, key, attempt.token, name))
    value = _encode(fn(step_key(namespace, key, name)))
    finished: Step = client.complete_step(namespace, key, attempt.token, name, value)
    attempt._keep_step(finished)
    return finished.result
