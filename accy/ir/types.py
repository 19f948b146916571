"""Element types and tensor types."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from accy.errors import ShapeError


class DType(Enum):
    """Element types. The value is the name used in the text form."""

    f16 = "f16"
    f32 = "f32"
    f64 = "f64"
    i32 = "i32"
    i64 = "i64"
    bool = "bool"

    __hash__ = object.__hash__  # a singleton: identity hashing at C speed (see Op)

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY_DTYPES[self]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.f16, DType.f32, DType.f64)

    @property
    def is_int(self) -> bool:
        return self in (DType.i32, DType.i64)

    @classmethod
    def parse(cls, text: str) -> DType:
        try:
            return cls(text)
        except ValueError:
            valid = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown dtype {text!r}; valid dtypes: {valid}") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype | type) -> DType:
        dt = np.dtype(dtype)
        for d, name in _NUMPY.items():
            if np.dtype(name) == dt:
                return d
        valid = ", ".join(_NUMPY.values())
        raise ValueError(f"numpy dtype {dt} has no accy dtype; supported: {valid}")

    def __repr__(self) -> str:
        return f"DType.{self.value}"


_NUMPY = {
    DType.f16: "float16",
    DType.f32: "float32",
    DType.f64: "float64",
    DType.i32: "int32",
    DType.i64: "int64",
    DType.bool: "bool",
}
_NUMPY_DTYPES = {d: np.dtype(name) for d, name in _NUMPY.items()}


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor's static shape and element type; text form ``f32[4,8]`` (scalar: ``f32[]``)."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType):
            raise ShapeError(f"tensor type of shape {self.shape!r}: the element type must be a "
                             f"DType (e.g. DType.f32), got {self.dtype!r}")
        if not isinstance(self.shape, tuple | list):
            raise ShapeError(f"tensor shape must be a tuple of integers, got {self.shape!r}")
        # Dimensions are taken exactly: numpy integers become ints, but 4.5, "4" and True are
        # mistakes, not 4, 4 and 1.
        for d in self.shape:
            if type(d) is not int and (isinstance(d, bool | np.bool_)
                                       or not isinstance(d, int | np.integer)):
                raise ShapeError(f"tensor shape {self.shape!r}: dimension {d!r} "
                                 f"({type(d).__name__}) is not an integer")
            if d < 0:
                raise ShapeError(f"negative dimension in shape {tuple(self.shape)}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(shape, self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"
