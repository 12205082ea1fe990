"""trainyard.AccelerateTracker: accelerator.log(values, step) to /metrics."""
from accelerate.tracking import GeneralTracker, on_main_process  # noqa: F401  (on_main_process: API parity)

import trainyard


class _TrainyardTracker(GeneralTracker):
    name = "trainyard"
    requires_logging_directory = False
    main_process_only = False  # every rank reports its own numbers

    def __init__(self, run_name="trainyard"):
        super().__init__()
        self.run_name = run_name
        self._last_step = 0

    @property
    def tracker(self):
        return self

    def store_init_configuration(self, values):
        pass

    def log(self, values, step=None, **kwargs):
        step = self._last_step + 1 if step is None else int(step)
        self._last_step = step
        numbers = {}
        for k, v in values.items():
            try:
                numbers[k] = float(v.item() if hasattr(v, "item") else v)
            except (TypeError, ValueError):
                continue
        loss = numbers.pop("loss", None)
        samples = numbers.pop("samples", None)
        trainyard.report(step, samples=samples, loss=loss, **numbers)


def make_tracker(run_name="trainyard"):
    return _TrainyardTracker(run_name)
