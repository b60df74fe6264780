#!/usr/bin/env python3
"""The PyTorch twin of build/cnn's training epoch, for `make bench`'s ratio.

The same network as c_examples/cnn (conv 3x3 1->16, relu, conv 3x3
16->16, relu, max pool 2, conv 3x3 16->64, relu, max pool 2, linear
3136->128, relu, dropout 0.25, linear 128->10, cross-entropy), PyTorch's
default initialisation, AdamW (lr 2e-3, weight decay 1e-4), batch 128 on
the same normalised Fashion-MNIST images, shuffled each epoch. One
epoch's training steps are timed (the batch copy, forward, loss read,
backward, optimizer step, zero_grad), data loading and evaluation
excluded, as build/cnn --bench times its own.

    python3 scripts/bench_cnn_torch.py DATA_DIR [--threads N] [--steps S]

prints `torch_cnn_epoch_ms MS` (S steps: `torch_cnn_steps_ms S MS`).
Exits 3 when torch is not installed.
"""
import argparse
import gzip
import os
import struct
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench_cnn_torch: torch is not installed", file=sys.stderr)
    sys.exit(3)

MEAN, STD = 0.2860, 0.3530  # the training images' pixel mean and sd, as build/cnn uses


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, = struct.unpack(">I", raw[:4])
    dims = [struct.unpack(">I", raw[4 + 4 * i:8 + 4 * i])[0] for i in range(magic & 0xFF)]
    data = torch.frombuffer(bytearray(raw[4 + 4 * len(dims):]), dtype=torch.uint8)
    return data.reshape(dims)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c3 = torch.nn.Conv2d(16, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.max_pool2d(F.relu(self.c3(x)), 2)
        x = F.dropout(F.relu(self.fc1(x.flatten(1))), 0.25, self.training)
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="steps to time (default: a whole epoch)")
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz")).float().div_(255.0)
    images = images.sub_(MEAN).div_(STD).unsqueeze(1).contiguous()
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz")).long()
    n, b = images.shape[0], args.batch
    per_epoch = n // b
    steps = args.steps or per_epoch
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
    net.train()
    order = torch.randperm(n)
    start = time.perf_counter()
    for s in range(steps):
        idx = order[(s % per_epoch) * b:(s % per_epoch + 1) * b]
        x, y = images[idx], labels[idx]
        loss = F.cross_entropy(net(x), y)
        loss.item()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ms = (time.perf_counter() - start) * 1000.0
    if args.steps:
        print("torch_cnn_steps_ms %d %.0f" % (steps, ms))
    else:
        print("torch_cnn_epoch_ms %.0f" % ms)


if __name__ == "__main__":
    main()
