# SPDX-License-Identifier: Apache-2.0
"""PyTorch workers for a prsgd averager.

    import prsgd.torch
    sampler = prsgd.torch.ShardSampler(len(train_set))
    loader = torch.utils.data.DataLoader(train_set, batch_size=64, sampler=sampler)
    model = MyNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    w = prsgd.torch.TorchWorker(model, opt, torch.nn.functional.cross_entropy, loader,
                                averager="tcp://127.0.0.1:7500", data_fingerprint=...)
    w.run()

**The flat layout.** The averager averages one float32 vector per member. TorchWorker lays a module out as
prsgd lays out its built-in models: every parameter in `named_parameters()` order, then every floating-point
buffer in `named_buffers()` order (batch-norm running means and variances); integer buffers such as
`num_batches_tracked` are not sent. Each tensor is flattened in row-major (C) order. For the PyTorch twins of
prsgd's models (prsgd_twins.py) this is exactly the C++ model's `params()` vector, so a TorchWorker of
fmnist-mlp and a `prsgd worker --model fmnist-mlp` can train in one job.

**Data.** The averager hands every member a data shard in WELCOME (and may hand it sample ranges per round
in RESTART). A `ShardSampler` given to the DataLoader (directly, or inside a BatchSampler) follows both:
TorchWorker configures it; with ranges in a RESTART it yields the samples they name (positions of each
epoch's seeded permutation of the data set, `prsgd.order`), shuffled, for that round; without them it yields
the member's shard, reshuffled every pass. A round's samples are trained at most once: when the loader runs
out of them before the round's steps are done (a `drop_last` BatchSampler), the round ends early.

**Rounds.** On each RESTART TorchWorker copies x̄ into the module, sets every parameter group's learning
rate to the round's step size, keeps (default) or clears the optimiser's state (`momentum_on_restart`,
like `prsgd worker --momentum-on-restart`), runs the round's local steps and sends the flat vector back.
The JOINs after the first carry the measured steps per second, which time-balanced intervals start from.
"""
import numpy as np
import torch
from torch.utils.data import BatchSampler, Sampler

from .evaluator import Evaluator as _Evaluator
from .order import samples_of
from .worker import Worker


def flat_tensors(module):
    """Returns [(name, tensor)] in the flat layout's order: parameters, then floating-point buffers."""
    out = [(n, p) for n, p in module.named_parameters()]
    out += [(n, b) for n, b in module.named_buffers() if b.is_floating_point()]
    return out


def flat_size(module):
    """Number of float32 values in the module's flat vector."""
    return sum(t.numel() for _, t in flat_tensors(module))


def flatten(module):
    """Returns the module's flat vector (a new float32 numpy array)."""
    with torch.no_grad():
        parts = [t.detach().reshape(-1).to(torch.float32).cpu() for _, t in flat_tensors(module)]
        return torch.cat(parts).numpy() if parts else np.zeros(0, np.float32)


def model_spec(module):
    """Returns the flat layout as `prsgd averager --model-spec` reads it: [{"name": ..., "shape": [...]}, ...] in
    flat order (json.dump it to a file). With it, the averager's --save-model writes these state_dict names."""
    return [{"name": n, "shape": list(t.shape)} for n, t in flat_tensors(module)]


def load_flat(module, vector):
    """Copies a flat vector into the module's parameters and floating-point buffers."""
    v = torch.from_numpy(np.ascontiguousarray(vector, dtype=np.float32).reshape(-1))
    n = flat_size(module)
    if v.numel() != n:
        raise ValueError(f"a flat vector of {v.numel()} floats does not fit a module of {n}")
    offset = 0
    with torch.no_grad():
        for _, t in flat_tensors(module):
            k = t.numel()
            t.copy_(v[offset:offset + k].view_as(t))
            offset += k


class ShardSampler(Sampler):
    """Yields the sample indices a member trains: its shard of [0, n) (a seeded permutation of all indices,
    every num_shards-th one from position `shard`, reshuffled each pass), or, for a round whose RESTART
    carried sample ranges, exactly the samples those ranges name (positions of each epoch's permutation,
    prsgd.order.samples_of) in a seeded random order."""

    def __init__(self, n):
        if n <= 0:
            raise ValueError("ShardSampler needs a non-empty data set")
        self.n = int(n)
        self.shard, self.num_shards, self.seed = 0, 1, 0
        self.ranges = None
        self.round = 0
        self.epoch = 0

    def configure(self, shard, num_shards, seed):
        """Sets the shard (from a WELCOME); the next pass starts from epoch 0."""
        if not 0 <= shard < num_shards:
            raise ValueError(f"shard {shard} of {num_shards}")
        self.shard, self.num_shards, self.seed, self.epoch = int(shard), int(num_shards), int(seed), 0

    def set_ranges(self, ranges, round_number):
        """Sets this round's [begin, end) ranges of global positions (None: train the shard)."""
        for b, e in ranges or ():
            if not 0 <= b <= e:
                raise ValueError(f"bad sample range [{b}, {e})")
        self.ranges, self.round = (list(ranges) if ranges is not None else None), int(round_number)

    def indices(self):
        if self.ranges is not None:
            idx = samples_of(self.ranges, self.n, self.seed)
            gen = np.random.default_rng([self.seed, 2, self.round])
            return idx[gen.permutation(idx.size)]
        base = np.random.default_rng([self.seed, 0]).permutation(self.n)[self.shard::self.num_shards]
        gen = np.random.default_rng([self.seed, 1, self.shard, self.epoch])
        return base[gen.permutation(base.size)]

    def __iter__(self):
        idx = self.indices()
        if self.ranges is None:
            self.epoch += 1
        return iter(idx.tolist())

    def __len__(self):
        if self.ranges is not None:
            return sum(e - b for b, e in self.ranges)
        return len(range(self.shard, self.n, self.num_shards))


def shard_loader(dataset, batch_size=64):
    """A DataLoader over a ShardSampler of `dataset` for a data set that returns a whole batch when indexed
    with a list of indices (prsgd.fmnist.FashionMnist does): no per-sample collation, and the batch size
    follows the job's (TorchWorker sets it at WELCOME)."""
    sampler = BatchSampler(ShardSampler(len(dataset)), batch_size, drop_last=False)
    return torch.utils.data.DataLoader(dataset, batch_size=None, sampler=sampler)


def _find_sampler(loader):
    s = getattr(loader, "sampler", None)
    if isinstance(s, ShardSampler):
        return s, getattr(loader, "batch_sampler", None)
    bs = getattr(loader, "batch_sampler", None) or (s if isinstance(s, BatchSampler) else None)
    if isinstance(bs, BatchSampler) and isinstance(bs.sampler, ShardSampler):
        return bs.sampler, bs
    return None, bs


class TorchWorker(Worker):
    """A prsgd worker that trains `model` with `optimizer` on batches (inputs, targets) from `data_loader`.

    loss_fn(outputs, targets) must return the mean loss of the batch. momentum_on_restart: "keep" or
    "reset". device: where the model lives. model_fingerprint, data_fingerprint and the remaining keyword
    arguments go to prsgd.Worker (model_size is the module's flat size).

    external=True joins a `prsgd averager --model external` job: the fingerprints default to
    prsgd.fingerprints.external(flat size) and external_data(training-set length, `labels`), and every JOIN
    carries the module's initial flat vector, which the averager starts from unless it has --init-model.
    The training-set length is the ShardSampler's (the data loader must use one)."""

    def __init__(self, model, optimizer, loss_fn, data_loader, averager, *, momentum_on_restart="keep",
                 device="cpu", external=False, labels=None, **kwargs):
        if momentum_on_restart not in ("keep", "reset"):
            raise ValueError(f"momentum_on_restart must be keep or reset (got {momentum_on_restart!r})")
        kwargs.setdefault("model_size", flat_size(model))
        sampler, batch_sampler = _find_sampler(data_loader)
        if external:
            from . import fingerprints
            if sampler is None and "data_fingerprint" not in kwargs:
                raise ValueError("external=True needs a data loader over a ShardSampler (or data_fingerprint=)")
            kwargs.setdefault("model_fingerprint", fingerprints.external(kwargs["model_size"]))
            if "data_fingerprint" not in kwargs:
                kwargs["data_fingerprint"] = fingerprints.external_data(sampler.n, labels)
            kwargs.setdefault("initial_model", flatten(model))
        super().__init__(averager, **kwargs)
        self.model, self.optimizer, self.loss_fn, self.loader = model, optimizer, loss_fn, data_loader
        self.keep_momentum = momentum_on_restart == "keep"
        self.device = torch.device(device)
        self.sampler, self._batch_sampler = sampler, batch_sampler
        self._batches = None

    def on_welcome(self, welcome):
        if self.sampler is not None:
            self.sampler.configure(welcome["sh"], welcome["ns"], welcome["sd"])
        job_batch = welcome["bs"]
        if job_batch > 0:
            mine = self.loader.batch_size
            if mine is None and self._batch_sampler is not None:
                self._batch_sampler.batch_size = job_batch  # follow the job's batch size
            elif mine is not None and mine > job_batch:
                raise ValueError(f"the data loader's batch size {mine} exceeds the job's {job_batch}")
        self._batches = None

    def _next_batch(self):
        if self._batches is None:
            self._batches = iter(self.loader)
        try:
            return next(self._batches)
        except StopIteration:
            if self.sampler is not None and self.sampler.ranges is not None:
                raise  # the round's samples are used up: none is trained twice (a drop_last loader stops early)
            self._batches = iter(self.loader)  # a shard without ranges: the next pass
            return next(self._batches)

    def _begin_round(self, params):
        rnd = self.round
        if self.sampler is not None and (rnd.ranges is not None or self.sampler.ranges is not None):
            self.sampler.set_ranges(rnd.ranges, rnd.number)
            self._batches = None  # this round's ranges (or back to the shard)
        load_flat(self.model, params)

    def _step_on(self, batch):
        inputs, targets = batch[0].to(self.device), batch[1].to(self.device)
        loss = self.loss_fn(self.model(inputs), targets)
        loss.backward()
        return float(loss.detach()), int(targets.shape[0])

    def train(self, params, interval):
        self._begin_round(params)
        if not self.keep_momentum:
            self.optimizer.state.clear()
        for group in self.optimizer.param_groups:
            group["lr"] = self.round.step_size
        self.model.train()
        steps = samples = 0
        loss_sum = 0.0
        for _ in range(interval):
            if self.round.cancelled.is_set():
                break
            try:
                batch = self._next_batch()
            except StopIteration:
                break  # this round's ranges are used up
            self.optimizer.zero_grad(set_to_none=True)
            loss, n = self._step_on(batch)
            self.optimizer.step()
            steps += 1
            samples += n
            loss_sum += loss * n
        return flatten(self.model), steps, samples, (loss_sum / samples if samples else 0.0)

    def gradient(self, params):
        """Mini-batch mode: the gradient of the parameters at x̄ on one batch, followed by the buffers' values
        after that forward pass (batch-norm statistics), which the averager averages."""
        self._begin_round(params)
        self.model.train()
        self.model.zero_grad(set_to_none=False)
        loss, n = self._step_on(self._next_batch())
        grads = [p.grad.detach().reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                 for _, p in self.model.named_parameters()]
        buffers = [b.detach().reshape(-1) for n_, b in self.model.named_buffers() if b.is_floating_point()]
        return torch.cat(grads + buffers).to(torch.float32).cpu().numpy(), n, loss


class Evaluator(_Evaluator):
    """Scores x̄ for a `prsgd averager --model external` job: loads it into `model` (prsgd.torch's flat layout)
    and returns the share of `test_loader`'s samples whose arg-max output equals the target, with the mean
    cross-entropy over them (torch.nn.functional.cross_entropy).

    model_fingerprint defaults to prsgd.fingerprints.external(flat size); the other keyword arguments go to
    prsgd.Evaluator (averager endpoint, heartbeat_ms, CURVE key files)."""

    def __init__(self, model, test_loader, averager, *, device="cpu", **kwargs):
        from . import fingerprints
        kwargs.setdefault("model_fingerprint", fingerprints.external(flat_size(model)))
        super().__init__(averager, **kwargs)
        self.model, self.loader, self.device = model, test_loader, torch.device(device)

    def score(self, params):
        load_flat(self.model, params)
        self.model.eval()
        correct = total = 0
        loss_sum = 0.0
        with torch.no_grad():
            for inputs, targets in self.loader:
                out = self.model(inputs.to(self.device))
                correct += int((out.argmax(dim=1).cpu() == targets).sum())
                loss_sum += float(torch.nn.functional.cross_entropy(out, targets.to(self.device), reduction="sum"))
                total += int(targets.shape[0])
        if total == 0:
            raise ValueError("the test loader yielded no samples")
        return correct / total, loss_sum / total


__all__ = ["TorchWorker", "Evaluator", "ShardSampler", "shard_loader", "flat_tensors", "flat_size", "flatten",
           "load_flat", "model_spec"]
