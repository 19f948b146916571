"""TargetProfile.to_dict / from_dict: a device's profile saved as JSON and read back equal
(planning without the device: experiments/ab_gemm.py --plans-only); bad files refused naming
the file and the field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from accy.ir.types import DType
from accy.target import TMA_COPY, WGMMA_F16, TargetProfile

SAVED = TargetProfile(device="NVIDIA CUDA / NVIDIA H100 / 580", dtypes=frozenset(
    {DType.f32, DType.i32, DType.i64, DType.bool, DType.f64}), max_work_group_size=1024,
    local_mem_bytes=49152, compute_units=132, atomics64=True,
    max_work_item_sizes=(1024, 1024, 64), tensor_cores=(WGMMA_F16, TMA_COPY),
    static_local_bytes=226 * 1024)


@pytest.mark.parametrize("profile", [TargetProfile(), SAVED])
def test_a_profile_survives_json(profile: TargetProfile) -> None:
    data = json.loads(json.dumps(profile.to_dict()))
    back = TargetProfile.from_dict(data)
    assert back == profile and back.fingerprint() == profile.fingerprint()
    assert data["dtypes"] == sorted(d.value for d in profile.dtypes)  # stable text
    assert back.describe() == profile.describe()


def test_fields_left_out_take_their_defaults() -> None:
    back = TargetProfile.from_dict({"compute_units": 7, "tensor_cores": [TMA_COPY]})
    assert back == dataclasses.replace(TargetProfile(), compute_units=7,
                                       tensor_cores=(TMA_COPY,))


@pytest.mark.parametrize("data, words", [
    ({"compute_units": "132"}, ["'compute_units'", "expected int", "'132'"]),
    ({"compute_units": True}, ["'compute_units'", "expected int"]),
    ({"atomics64": 1}, ["'atomics64'", "expected bool"]),
    ({"dtypes": ["f32", "f17"]}, ["'dtypes'", "f17"]),
    ({"tensor_cores": "wgmma"}, ["'tensor_cores'", "expected a list"]),
    ({"max_work_item_sizes": [1024, "64"]}, ["'max_work_item_sizes'", "expected int"]),
    ({"math_tier": "fastest"}, ["'math_tier'", "'ieee', 'fast'", "fastest"]),
    ({"colour": "red"}, ["unknown field 'colour'", "compute_units"]),
    ([1, 2], ["expected an object"]),
])
def test_bad_profiles_are_refused_naming_the_file_and_field(data, words) -> None:
    with pytest.raises(ValueError) as e:
        TargetProfile.from_dict(data, where="h100.json")
    assert str(e.value).startswith("h100.json: ")
    for w in words:
        assert w in str(e.value)
