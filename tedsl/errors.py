"""The one exception hierarchy of tedsl.

Every error a user can trigger derives from :class:`TedslError`.  Raw islpy or
llvmlite exceptions are wrapped with context before they reach the user.
"""


class TedslError(Exception):
    """Base class of every error raised by tedsl."""


class ScheduleError(TedslError, ValueError):
    """An illegal or malformed schedule (bad axis, bad factor, illegal loop kind)."""


class DependenceError(ScheduleError):
    """A schedule that would violate a data dependence.

    ``.dependences`` lists the offending dependences (``str`` of each is one readable line)
    and ``.relations`` their isl relations, which the message itself does not print."""

    def __init__(self, message, dependences=(), relations=()):
        super().__init__(message)
        self.dependences = list(dependences)
        self.relations = list(relations) or [getattr(d, "relation", None)
                                             for d in self.dependences]


class InvalidAxisError(ScheduleError):
    """An axis that does not belong to the stage it is used on."""


class AttachError(ScheduleError):
    """An invalid ``compute_at`` / ``compute_inline`` attach point."""


class DefinitionError(TedslError, ValueError):
    """A malformed compute definition (arity, dtype, non-affine bound ...)."""


class DTypeError(DefinitionError, TypeError):
    """An unknown dtype or an operation the dtype does not support."""


class ArgumentError(TedslError, ValueError):
    """A call whose arguments do not match the signature (count, dtype, layout, device)."""


class ShapeError(ArgumentError):
    """A call whose array shapes do not match the signature or each other."""


class BoundsError(TedslError, IndexError):
    """A data-dependent index fell outside its tensor at run time."""


class OutOfMemoryError(TedslError, MemoryError):
    """A kernel could not allocate a temporary buffer."""


class CompileError(TedslError, RuntimeError):
    """Compilation failed; ``.log`` holds the compiler's log."""

    def __init__(self, message, log=""):
        super().__init__(message)
        self.log = log


class TargetUnavailableError(TedslError, RuntimeError):
    """The requested target (e.g. a CUDA GPU or its driver) is not present."""


class CudaError(TedslError, RuntimeError):
    """A CUDA driver call failed; ``.code`` and ``.name`` identify the driver error."""

    def __init__(self, message, code=None, name=None):
        super().__init__(message)
        self.code = code
        self.name = name


class InternalError(TedslError, RuntimeError):
    """A bug in tedsl itself."""

    def __init__(self, message):
        super().__init__(message + "\n(this is a bug in tedsl; please report it with the code above)")
