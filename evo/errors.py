"""User-facing errors: anything the CLI should report as one line and a non-zero exit."""


class EvoError(Exception):
    """An error caused by input or environment, reported to the user without a traceback."""


class InvalidCandidate(EvoError):
    """A candidate violates its family's parameter domains or constraints (status ``invalid``)."""


class LaunchRejected(EvoError):
    """A kernel launch that cannot be set up on the device (shared memory or threads over its
    limits), refused before any kernel ran: the candidate is ``resource_rejected``."""
