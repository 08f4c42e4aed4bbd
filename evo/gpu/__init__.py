"""The GPU side: the crash-isolated worker and what runs in it (GREEN's gate and draws, FAST's timing,
the suites, loading and launching kernels)."""
