"""Every parameter of training, online updates and partitioning is checked one way
(:mod:`speed._params`): each is given invalid values, generated from its rule, and must be
refused with a one-line error that names it; numpy scalars are accepted and kept as Python values.
(After scikit-learn's ``check_param_validation``.)"""

from dataclasses import fields

import numpy as np
import pytest

import speed
from speed._params import Boolean, Interval, Options, plain, problem
from speed.partition.api import PARTITION_RULES
from speed.train.config import UPDATE_RULES, ConfigError, TrainConfig, UpdateConfig


def invalid_values(rule):
    """Values that break ``rule``: the wrong kind, and each side of its range."""
    if isinstance(rule, Interval):
        bad = ["1", [1], True]
        if rule.kind is int:
            bad.append(1.5)
        else:
            bad += [float("nan"), float("inf")]
        if rule.low is not None:
            bad.append(rule.low if rule.low_open else rule.low - 1)
        if rule.high is not None:
            bad.append(rule.high if rule.high_open else rule.high + 1)
        return bad
    if isinstance(rule, Boolean):
        return ["yes", 1, 0.0]
    return ["no-such-choice", 3]  # a collection of names


def train_rules():
    for f in fields(TrainConfig):
        for key in ("rule", "choices"):
            if f.metadata.get(key) is not None:
                yield f.name, f.metadata[key]


TRAIN_CASES = [(name, v) for name, rule in train_rules() for v in invalid_values(rule)]


def test_every_training_parameter_but_a_few_has_a_rule():
    """A new field gets a rule: only the ones checked by hand (their own rules) go without."""
    ruled = {name for name, _ in train_rules()}
    assert {f.name for f in fields(TrainConfig)} - ruled == {"device", "split_times"}


@pytest.mark.parametrize("name, value", TRAIN_CASES, ids=[f"{n}={v!r}" for n, v in TRAIN_CASES])
def test_invalid_training_parameter_is_refused_by_name(name, value):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**{name: value}).validate()
    assert err.value.param == name and str(err.value).startswith(f"{name} ") and "\n" not in str(err.value)


UPDATE_CASES = [(name, v) for name, rule in UPDATE_RULES.items() for v in invalid_values(rule)]


@pytest.mark.parametrize("name, value", UPDATE_CASES, ids=[f"{n}={v!r}" for n, v in UPDATE_CASES])
def test_invalid_update_parameter_is_refused_by_name(name, value):
    with pytest.raises(speed.InputError, match=f"^{name} "):
        UpdateConfig(**{name: value}).validate()


PARTITION_CASES = [(name, v) for name, rule in PARTITION_RULES.items() for v in invalid_values(rule)]


@pytest.mark.parametrize("name, value", PARTITION_CASES, ids=[f"{n}={v!r}" for n, v in PARTITION_CASES])
def test_invalid_partition_parameter_is_refused_by_name(name, value):
    ev = speed.Events.from_arrays([0, 1], [1, 2], [0, 1])
    kw = {"num_parts": 2, name: value}
    with pytest.raises(speed.InputError, match=f"^{name} "):
        speed.partition(ev, **kw)


def test_numpy_scalars_are_accepted_and_kept_as_python_values():
    c = TrainConfig(batch_size=np.int64(200), lr=np.float32(0.5), epochs=np.uint8(2), deterministic=np.bool_(True),
                    val=np.float64(0.2)).validate()
    assert (c.batch_size, c.epochs, c.deterministic, c.val) == (200, 2, True, 0.2)
    assert [type(x) for x in (c.batch_size, c.lr, c.deterministic)] == [int, float, bool]
    u = UpdateConfig(passes=np.int32(2), replay=np.float64(0.5)).validate()
    assert (type(u.passes), type(u.replay)) == (int, float)
    ev = speed.Events.from_arrays([0, 1, 2], [1, 2, 0], [0, 1, 2])
    got = speed.partition(ev, np.int64(2), topk=np.float32(0.5), beta=np.int16(1), progress=False)
    assert np.array_equal(got.node_parts, speed.partition(ev, 2, topk=0.5, beta=1, progress=False).node_parts)


def test_numpy_batch_size_through_speed_train(tmp_path):
    """A numpy integer reaches speed.train's config as the int it stands for (metrics.json holds it)."""
    ev = speed.generate_events(num_events=600, num_nodes=40, seed=0)
    m = speed.train(ev, model="jodie", epochs=1, batch_size=np.int64(200), memory_dim=np.int32(8),
                    time_dim=8, embedding_dim=8, out=tmp_path / "run", progress=False, seed=0)
    assert m["config"]["batch_size"] == 200 and type(m["config"]["batch_size"]) is int


def test_rules_say_why():
    assert problem(Interval(int, 1), 0) == "must be an integer >= 1, got 0"
    assert problem(Interval(float, 0, 1, high_open=False), 2) == "must be a fraction in [0, 1], got 2"
    assert problem(Interval(float, 0, 10, high_open=False), -1) == "must be a number in [0, 10], got -1"
    assert problem(Options(("a", "b")), "c") == "must be one of a, b, got 'c'"
    assert problem(("a", "b"), "a") is None and problem(None, object()) is None
    assert problem(Boolean(), np.bool_(False)) is None
    assert plain(np.int64(3)) == 3 and type(plain(np.int64(3))) is int and plain("x") == "x"
