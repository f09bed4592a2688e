"""Training data: token-id files and their loss masks, read through memory maps.

A data directory holds uint16 little-endian token-id files: train.bin and valid.bin (plain text,
every token a target) and optionally chat_train.bin and chat_valid.bin (rendered conversations)
with a uint8 loss mask beside each, one byte per token: 1 where the token is a target the model
learns to produce (the assistant's turns), 0 elsewhere. The mask of X.bin is X.mask, or what
data.json's "masks" object names ({"chat_train.bin": "chat_train.mask", ...}). data.json, when
present, may give the vocabulary size ("vocabulary": {"vocab_size": N}, as tools/corpus writes it,
or a top-level "vocab_size"), checked against the model's.

Batches are random windows of seq+1 tokens; the loss of position t (predicting token t+1) is
weighted by the mask of token t+1. Validation windows are fixed: evenly spaced over the file."""
import json
import os

import numpy as np
import torch


class DataError(Exception):
    pass


class TokenFile:
    def __init__(self, path, mask_path=None, vocab_size=None):
        self.path = path
        if not os.path.isfile(path):
            raise DataError(f"{path}: no such file")
        self.ids = np.memmap(path, dtype="<u2", mode="r")
        self.mask = None
        if mask_path is not None:
            if not os.path.isfile(mask_path):
                raise DataError(f"{mask_path}: loss mask missing (one uint8 per token of {path})")
            self.mask = np.memmap(mask_path, dtype=np.uint8, mode="r")
            if len(self.mask) != len(self.ids):
                raise DataError(f"{mask_path}: {len(self.mask)} bytes for {len(self.ids)} tokens in {path}")
        if vocab_size is not None and len(self.ids):
            top = int(self.ids[: min(len(self.ids), 1 << 24)].max())
            if top >= vocab_size:
                raise DataError(f"{path}: token id {top} is outside the vocabulary 0..{vocab_size - 1}")

    def __len__(self):
        return len(self.ids)

    def windows(self, starts, seq):
        """ids [n, seq+1] int64 and target mask [n, seq] float32 of windows starting at `starts`."""
        idx = np.asarray(starts)[:, None] + np.arange(seq + 1)
        ids = torch.from_numpy(self.ids[idx].astype(np.int64))
        if self.mask is None:
            mask = torch.ones(len(starts), seq)
        else:
            mask = torch.from_numpy(self.mask[idx[:, 1:]].astype(np.float32))
        return ids, mask

    def random_starts(self, rng, n, seq):
        if len(self) < seq + 2:
            raise DataError(f"{self.path}: {len(self)} tokens, fewer than one window of {seq + 1}")
        return rng.integers(0, len(self) - seq - 1, size=n)

    def fixed_starts(self, n, seq):
        """n evenly spaced windows (fewer if the file is short); the same on every call."""
        last = len(self) - seq - 1
        if last < 0:
            raise DataError(f"{self.path}: {len(self)} tokens, fewer than one window of {seq + 1}")
        n = min(n, last // seq + 1)
        return np.linspace(0, last, n).astype(np.int64)


class Dataset:
    """train/valid text and, when present, chat files of one data directory."""

    def __init__(self, data_dir, vocab_size):
        meta = {}
        meta_path = os.path.join(data_dir, "data.json")
        if os.path.isfile(meta_path):
            with open(meta_path) as f:
                meta = json.load(f)
            declared = meta.get("vocabulary", {}).get("vocab_size", meta.get("vocab_size"))
            if declared is not None and declared != vocab_size:
                raise DataError(f"{meta_path}: vocab_size {declared} differs from the model's {vocab_size}")
        masks = meta.get("masks", {})

        def load(name, masked):
            path = os.path.join(data_dir, name)
            mask = os.path.join(data_dir, masks.get(name, name[:-4] + ".mask")) if masked else None
            return TokenFile(path, mask, vocab_size)

        self.train = load("train.bin", False)
        self.valid = load("valid.bin", False)
        has_chat = os.path.isfile(os.path.join(data_dir, "chat_train.bin"))
        self.chat_train = load("chat_train.bin", True) if has_chat else None
        self.chat_valid = load("chat_valid.bin", True) if has_chat else None
        self.meta = meta

    def batch(self, rng, n, seq, chat_share):
        """n windows: each from the chat data with probability chat_share, else from the text."""
        n_chat = int(rng.binomial(n, chat_share)) if self.chat_train is not None and chat_share > 0 else 0
        parts = []
        if n - n_chat:
            parts.append(self.train.windows(self.train.random_starts(rng, n - n_chat, seq), seq))
        if n_chat:
            parts.append(self.chat_train.windows(self.chat_train.random_starts(rng, n_chat, seq), seq))
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
