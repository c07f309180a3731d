"""Load the executor core (``device_agents/ppexec``) as ``parapipe._ppexec`` and bind parapipe's errors.

The pipelined executor has ONE implementation, kept in ``device_agents/ppexec`` because it also runs on
boards inside deploy bundles, where parapipe is not installed (standard library, numpy and onnxruntime
only). parapipe imports those very files from the data folder (:func:`parapipe._paths.data_dir`) and passes
:data:`PARAPIPE_ERRORS`, so that callers here get :class:`~parapipe.errors.InputError` and
:class:`~parapipe.errors.ExecutionError` with the usual one-line messages.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from parapipe._paths import data_dir
from parapipe.errors import ExecutionError, ParapipeError, input_error

#: Module name the core is registered under in ``sys.modules``.
CORE_MODULE = "parapipe._ppexec"


def core_dir():
    """Folder of the executor core package (``device_agents/ppexec``)."""
    return data_dir("device_agents") / "ppexec"


def load_core() -> ModuleType:
    """Import ``device_agents/ppexec`` once as :data:`CORE_MODULE` and return it.

    Raises
    ------
    FileNotFoundError
        The data folder is missing (a broken install: reinstall parapipe).
    """
    module = sys.modules.get(CORE_MODULE)
    if module is not None:
        return module
    folder = core_dir()
    spec = importlib.util.spec_from_file_location(CORE_MODULE, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"executor core {folder} is missing; reinstall parapipe with 'pip install .'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[CORE_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(CORE_MODULE, None)
        raise
    return module


core = load_core()

#: parapipe's error classes for the core: InputError for bad plans/frames, ExecutionError for failed runs.
PARAPIPE_ERRORS = core.ErrorKinds(execution=ExecutionError, input=input_error, passthrough=(ParapipeError,))
