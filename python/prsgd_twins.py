# SPDX-License-Identifier: Apache-2.0
"""PyTorch twins of prsgd's built-in models, with the same state_dict names as the weights prsgd writes.

    import prsgd_twins
    model = prsgd_twins.make("fmnist-cnn")
    model.load_state_dict(prsgd_twins.load_safetensors("model.safetensors"), strict=True)

`prsgd local --save-model FILE`, `prsgd averager --save-model FILE` and `prsgd export` write safetensors
files whose tensor names and layouts are exactly these modules' state_dict(), num_batches_tracked included,
so strict=True loading works. load_safetensors/save_safetensors read and write the format with numpy alone
(the `safetensors` package, if installed, reads the same files).

Inputs: Fashion-MNIST models take (N, 1, 28, 28) images scaled to [0, 1] and normalised with mean 0.2860 and
std 0.3530; kws-cnn takes (N, 1, 98, 40) log-mel features as prsgd computes them. Construction draws the same
random numbers in the same order as the nn.Sequential models bench/vs_pytorch used before, so a given
torch.manual_seed gives the same initial parameters.
"""
import json
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FMNIST_MEAN, FMNIST_STD = 0.2860, 0.3530
FMNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                  "Ankle boot"]
KWS_WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "zero", "one"]


class FmnistMlp(nn.Module):
    """fmnist-mlp: 784-512-256-classes with ReLU."""

    def __init__(self, classes=10, in_shape=(1, 28, 28)):
        super().__init__()
        n = int(np.prod(in_shape))
        self.fc1 = nn.Linear(n, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class FmnistCnn(nn.Module):
    """fmnist-cnn: conv5x5(16, pad 2)+ReLU+maxpool 2, conv5x5(32, pad 2)+ReLU+maxpool 2, fc."""

    def __init__(self, classes=10, in_shape=(1, 28, 28)):
        super().__init__()
        c, h, w = in_shape
        self.conv1 = nn.Conv2d(c, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc = nn.Linear(32 * (h // 4) * (w // 4), classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


class BasicBlock(nn.Module):
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)); the shortcut projects (1x1 conv + BN) when the shape
    changes, else it is the identity (an empty nn.Sequential)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + self.shortcut(x))


class FmnistResNet(nn.Module):
    """fmnist-resnet (3 blocks per stage, ResNet-20) and fmnist-resnet8 (1): conv3x3(16)+BN+ReLU, three stages
    of basic blocks with 16/32/64 channels (stride 2 at the start of stages 2 and 3), global average pool, fc."""

    def __init__(self, blocks=3, classes=10, in_shape=(1, 28, 28)):
        super().__init__()
        self.conv1 = nn.Conv2d(in_shape[0], 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        cin = 16
        for stage in range(3):
            cout = 16 << stage
            layers = []
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, 2 if stage > 0 and b == 0 else 1))
                cin = cout
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layers))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class KwsCnn(nn.Module):
    """kws-cnn: three blocks of conv3x3 (16/32/64, no bias) + BN + ReLU + maxpool 2, global average pool, fc."""

    def __init__(self, classes=12, in_shape=(1, 98, 40)):
        super().__init__()
        cin = in_shape[0]
        for i, cout in enumerate((16, 32, 64), start=1):
            setattr(self, f"conv{i}", nn.Conv2d(cin, cout, 3, padding=1, bias=False))
            setattr(self, f"bn{i}", nn.BatchNorm2d(cout))
            cin = cout
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        for i in (1, 2, 3):
            x = F.max_pool2d(F.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x))), 2)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make(name, classes=None, in_shape=None):
    """Returns the twin of prsgd model `name` (fmnist-mlp, fmnist-cnn, fmnist-resnet, fmnist-resnet8, kws-cnn)."""
    kws = name.startswith("kws")
    classes = classes or (12 if kws else 10)
    in_shape = tuple(in_shape or ((1, 98, 40) if kws else (1, 28, 28)))
    if name == "fmnist-mlp":
        return FmnistMlp(classes, in_shape)
    if name == "fmnist-cnn":
        return FmnistCnn(classes, in_shape)
    if name == "fmnist-resnet":
        return FmnistResNet(3, classes, in_shape)
    if name == "fmnist-resnet8":
        return FmnistResNet(1, classes, in_shape)
    if name == "kws-cnn":
        return KwsCnn(classes, in_shape)
    raise ValueError(f"no PyTorch twin for model {name!r}")


_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base = 8 + n
    arrays = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")
        arrays[name] = np.frombuffer(data[base + begin:base + end], dtype=dtype).reshape(info["shape"]).copy()
    return arrays, metadata


def load_safetensors(path):
    """Returns the file's tensors as a state_dict for load_state_dict(..., strict=True)."""
    arrays, _ = read_safetensors(path)
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def save_safetensors(state_dict, path, metadata=None):
    """Writes a state_dict (float32 / int64 tensors) as safetensors, e.g. for `prsgd eval` or `prsgd predict`."""
    names = {np.dtype(v): k for k, v in _DTYPES.items()}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in state_dict.items():
        a = t.detach().cpu().numpy()
        a = np.ascontiguousarray(a).reshape(a.shape)  # ascontiguousarray makes a scalar 1-d
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
