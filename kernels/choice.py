"""The choice among the paged-attention backends: which can run here, and `auto`."""

from __future__ import annotations

import torch

from kernels.metadata import AttentionBackend

KERNEL_CHOICES = ("auto", "torch", "triton", "flash_attn")


def _cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def available_kernels(device: torch.device | str, page_size: int = 16) -> list[str]:
    """The backends that can run on `device` for `page_size`, fastest first."""
    from kernels import flash_attn as fa

    names: list[str] = []
    if _cuda(device):
        if fa.usable(page_size):
            names.append("flash_attn")
        names.append("triton")
    names.append("torch")
    if not _cuda(device) and _triton_importable():
        names.append("triton")  # interpreted: correct, slow
    return names


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_kernel(name: str, device: torch.device | str, page_size: int = 16) -> str:
    """Turn a config choice into a backend name; `auto` is the fastest available.

    Raises ValueError naming the choice when it is unknown or cannot run here.
    """
    if name not in KERNEL_CHOICES:
        raise ValueError(f"kernel={name!r}: valid: {', '.join(KERNEL_CHOICES)}")
    avail = available_kernels(device, page_size)
    if name == "auto":
        return avail[0]
    if name not in avail:
        raise ValueError(f"kernel={name!r} cannot run on device={str(device)!r} with "
                         f"page_size={page_size}; available: {', '.join(avail)}")
    return name


def get_attention_backend(name: str, device: torch.device | str = "cpu",
                          page_size: int = 16) -> AttentionBackend:
    """The backend for config choice `name` (`auto`, `torch`, `triton`, `flash_attn`)."""
    resolved = resolve_kernel(name, device, page_size)
    if resolved == "torch":
        from kernels.torch_ref import TorchRefBackend
        return TorchRefBackend()
    if resolved == "triton":
        from kernels.triton_paged import TritonBackend
        return TritonBackend()
    from kernels.flash_attn import FlashAttnBackend
    return FlashAttnBackend()
