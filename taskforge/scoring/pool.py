"""The scorer's pool of pre-started sandboxes, each laid ahead with the tree it will run on."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from taskforge.errors import TaskforgeError
from taskforge.repo.suite import lay_tree, prespawn_supervisor
from taskforge.sandbox import Sandbox, SandboxBackend, SandboxLimits

__all__ = ["ContainerPool", "Layer", "lay_task_tree"]

_PENDING_WAIT_S = 120.0


def _close_quietly(box: Sandbox) -> None:
    try:
        box.close()
    except TaskforgeError:
        pass  # the engine lost it already; the container leak checks see what is left


def _drain(ready: queue.SimpleQueue[tuple[Sandbox, Hashable]]) -> list[Sandbox]:
    """Every container in ``ready``, taken out (never blocking: another thread may take too)."""
    out = []
    while True:
        try:
            out.append(ready.get_nowait()[0])
        except queue.Empty:
            return out


Layer = tuple[Hashable, Callable[[Sandbox, bool], None]]
"""What a pool lays into its containers: a key, and ``lay(box, replace)`` (``replace``: the box
holds another layer's files, which must go first)."""


class ContainerPool:
    """Pre-started sandboxes, each handed out once and then destroyed by its user.

    ``acquire(image)`` returns a started container of ``image``: a ready one when there is one,
    else one already starting once it is ready, else one started on the spot. Each acquire
    refills the pool in the background to ``size`` ready containers of the image last asked for
    (``refill=False``: the caller refills with ``warm``, to as many as it knows it will ask for);
    ready containers of other images are closed (``wasted`` counts them).
    ``acquire(image, layer=...)`` returns one that holds the layer's files (a task's tree): the
    containers the pool starts from then on are laid in the background with the layer last asked
    for, so a run of scorings of one task finds its tree in place, and a container laid for
    another task is laid again, replacing it, in the one exec a fresh container would need.
    """

    def __init__(self, backend: SandboxBackend, *, limits: SandboxLimits, size: int,
                 labels: Mapping[str, str] | None = None) -> None:
        if size < 0:
            raise ValueError(f"pool size must be at least 0, got {size}")
        self.backend = backend
        self.limits = limits
        self.size = size
        self.labels = {"taskforge.role": "score", **(labels or {})}
        self._ready: dict[str, queue.SimpleQueue[tuple[Sandbox, Hashable]]] = {}
        self._layers: dict[str, Layer] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        """Notified whenever a fill ends (a container ready, or none) and when the pool closes."""
        self._pending: dict[str, int] = {}
        self._filler = ThreadPoolExecutor(max_workers=max(1, min(size, 4)), thread_name_prefix="taskforge-pool")
        self._closed = False
        self.started = 0
        self.hits = 0
        self.laid_hits = 0
        """Containers handed out with the asked-for layer already in place."""
        self.wasted = 0
        """Containers started ahead and closed unused (their image was no longer asked for)."""

    def _start(self, image: str) -> Sandbox:
        box = self.backend.start(image, limits=self.limits, labels=self.labels)
        with self._lock:
            self.started += 1
        return box

    def _fill_one(self, image: str) -> None:
        key: Hashable = None
        box: Sandbox | None = None
        try:
            box = self._start(image)
            with self._lock:
                layer = self._layers.get(image)
            if layer is not None:
                layer[1](box, False)
                key = layer[0]
        except TaskforgeError:
            if box is not None:
                _close_quietly(box)
            box = None  # acquire starts its own and reports the error
        except BaseException:
            if box is not None:
                _close_quietly(box)
            with self._lock:
                self._pending[image] -= 1
                self._changed.notify_all()
            raise
        with self._lock:
            # The count and the put in one step: a waiter (``_take``) sees the container
            # either pending or ready, never neither.
            self._pending[image] -= 1
            self._changed.notify_all()
            if box is None:
                return
            if not self._closed and image in self._ready:
                self._ready[image].put((box, key))
                return
            self.wasted += 1
        _close_quietly(box)

    def _refill(self, image: str, up_to: int | None = None) -> None:
        target = self.size if up_to is None else min(self.size, up_to)
        stale: list[Sandbox] = []
        with self._lock:
            if self._closed:
                return
            for other in [i for i in self._ready if i != image]:
                stale += _drain(self._ready.pop(other))
            self.wasted += len(stale)
            ready = self._ready.setdefault(image, queue.SimpleQueue())
            missing = max(0, target - ready.qsize() - self._pending.get(image, 0))
            self._pending[image] = self._pending.get(image, 0) + missing
        for box in stale:  # outside the lock: removing a container takes the engine a while
            _close_quietly(box)
        for submitted in range(missing):
            try:
                self._filler.submit(self._fill_one, image)
            except RuntimeError:  # the pool closed meanwhile: these fills never start
                with self._lock:
                    self._pending[image] -= missing - submitted
                    self._changed.notify_all()
                return

    def warm(self, image: str, *, up_to: int | None = None) -> None:
        """Start filling the pool with containers of ``image`` now (to ``up_to`` ready ones, at
        most ``size``: a caller that knows how many it will ask for wastes no starts)."""
        self._refill(image, up_to)

    def acquire(self, image: str, *, layer: Layer | None = None, refill: bool = True) -> Sandbox:
        """A container of ``image`` (laid with ``layer``). ``refill=False`` leaves the refill to a
        later ``warm``: a caller whose runs are about to start keeps the CPU for them, and starts
        the next containers once they are done."""
        with self._lock:
            if layer is not None:
                self._layers[image] = layer
        box, key = self._take(image)
        if refill:
            self._refill(image)
        if box is None:
            box = self._start(image)
        if layer is not None:
            if key == layer[0]:
                with self._lock:
                    self.laid_hits += 1
            else:
                try:
                    layer[1](box, key is not None)
                except BaseException:
                    box.close()
                    raise
        return box

    def _take(self, image: str) -> tuple[Sandbox | None, Hashable]:
        """A ready container of ``image``; else, while one is being started, that one once it is
        ready (it is underway, so it is ready no later than one started now would be, but for
        fills still queued behind others); else none (or after ``_PENDING_WAIT_S``)."""
        deadline = time.monotonic() + _PENDING_WAIT_S
        dead: list[Sandbox] = []
        try:
            with self._changed:
                while True:
                    ready = self._ready.get(image)  # again each time: a refill of another image replaces it
                    while ready is not None:
                        try:
                            candidate, laid = ready.get_nowait()
                        except queue.Empty:
                            break
                        if candidate.alive:
                            self.hits += 1
                            return candidate, laid
                        dead.append(candidate)
                    left = deadline - time.monotonic()
                    if self._closed or not self._pending.get(image, 0) or left <= 0:
                        return None, None
                    self._changed.wait(left)
        finally:
            for box in dead:
                _close_quietly(box)

    def discard(self, box: Sandbox) -> None:
        """Destroy a container its user is done with, in the background: the verdict need not
        wait for the engine to remove it (``close`` waits for every one)."""
        try:
            self._filler.submit(_close_quietly, box)
        except RuntimeError:  # the pool is closed: no background left
            _close_quietly(box)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            queues = list(self._ready.values())
            self._ready.clear()
            self._changed.notify_all()
        self._filler.shutdown(wait=True)
        for ready in queues:
            for box in _drain(ready):
                _close_quietly(box)


def lay_task_tree(box: Sandbox, replace: bool, *, tree: Path, tools: Mapping[str, bytes],
                  supervisor: SandboxLimits | None = None) -> None:
    """A :data:`Layer`'s ``lay``: a task's start state and the scorer's tools, and with
    ``supervisor`` (the scorer's limits) the run's supervisor started, waiting for its request."""
    lay_tree(box, tree, tools, replace=replace)
    if supervisor is not None:
        prespawn_supervisor(box, supervisor)
