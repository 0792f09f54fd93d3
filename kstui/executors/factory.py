"""The executor the flags ask for: local, a command template, SSH or Ray."""

from __future__ import annotations

from pathlib import Path

from kstui.executors.devices import parse_devices
from kstui.executors.local import LocalExecutor
from kstui.executors.protocol import DEFAULT_TIMEOUT_S, Executor, ExecutorError
from kstui.executors.template import TemplateExecutor


def make_executor(
    gpu: str | None,
    eval_cmd: str | None,
    devices: str | None,
    *,
    shards: int = 1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    warm: bool = False,
    workspace: Path | None = None,
) -> Executor:
    """The executor the flags ask for: --gpu (local | ssh://… | ray[://…]), --eval-cmd, --devices, --shards;
    warm prepares the local executor's workers ahead (the others start theirs on request); the local
    executor hides `workspace` from its workers."""
    device_list = parse_devices(devices)
    if shards < 1:
        raise ExecutorError(f"--shards must be at least 1 (got {shards})")
    if gpu and eval_cmd:
        raise ExecutorError("--gpu and --eval-cmd exclude each other: pick one place to evaluate")
    is_ray = gpu is not None and (gpu == "ray" or gpu.startswith("ray://"))
    if shards > 1 and not is_ray:
        raise ExecutorError("--shards needs --gpu ray (for several local GPUs use --devices 0,1,…)")
    if eval_cmd:
        return TemplateExecutor(eval_cmd, timeout_s=timeout_s, devices=device_list)
    if gpu is None or gpu == "local":
        return LocalExecutor(timeout_s=timeout_s, devices=device_list, warm=warm, workspace=workspace)
    if gpu.startswith("ssh://"):
        from kstui.executors.ssh import SshExecutor

        return SshExecutor.from_url(gpu, devices=device_list, timeout_s=timeout_s)
    if is_ray:
        if device_list:
            raise ExecutorError("--devices does not apply to --gpu ray: Ray assigns the GPUs (use --shards)")
        from kstui.executors.ray import RayExecutor

        # "ray://host:10001" is Ray Client's own address form; plain "ray" joins or starts a local instance.
        address = gpu if gpu.startswith("ray://") else None
        return RayExecutor(address=address, shards=shards, timeout_s=timeout_s)
    raise ExecutorError(f"--gpu {gpu!r} is not understood: use local, ssh://[user@]host[:port][/python], or ray[://address]")
