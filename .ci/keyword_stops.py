"""Run from the repository root: python .ci/keyword_stops.py DATA.lmdb [-v]

Which feedline modules a FeedLoader keyword travels through from FeedLoader.__init__.

A stop is a call into feedline code that receives the keyword's value or an object made
from it (a return value, or the object built, of a call that received one). Consecutive
calls in one module are one stop; a return is a stop in a module left earlier.
"""
import sys, os, tempfile
import numpy as np
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
from tests.helpers_images import *  # noqa
import feedline
from feedline.loading.loader import FeedLoader
from feedline.transforms import RandomErasing  # noqa

class Tag(str):
    pass

def trace(kwargs, key, store):
    value = kwargs[key]
    tracked = {id(value): value}
    stops = []
    flagged = set()
    root = os.path.dirname(feedline.__file__)
    def prof(frame, event, arg):
        code = frame.f_code
        ours = code.co_filename.startswith(root)
        if event == "call":
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            loc = frame.f_locals
            vals = [loc.get(n) for n in names]
            extra = []
            for v in vals:
                if isinstance(v, dict):
                    extra += list(v.values())
                if isinstance(v, (list, tuple)):
                    extra += list(v)
            if any(id(v) in tracked for v in vals + extra if v is not None):
                if ours:
                    mod = os.path.relpath(code.co_filename, os.path.dirname(root))
                    stops.append((mod, code.co_name))
                flagged.add(id(frame))
        elif event == "return" and id(frame) in flagged:
            flagged.discard(id(frame))
            for v in (arg, frame.f_locals.get("self")):
                if v is not None and not isinstance(v, (bool, int, float)) and v is not store:
                    tracked[id(v)] = v
    sys.setprofile(prof)
    try:
        loader = FeedLoader(store, **kwargs)
    finally:
        sys.setprofile(None)
    loader.close()
    modules = []
    for mod, fn in stops:
        if not modules or modules[-1] != mod:
            modules.append(mod)
    returns = sum(1 for i, m in enumerate(modules) if m in modules[:i])
    return modules, returns, stops

if __name__ == "__main__":
    from feedline.stores import open_dataset
    path = sys.argv[1]
    store = open_dataset(path)
    import inspect
    params = inspect.signature(FeedLoader.__init__).parameters
    print("FeedLoader parameters (without self):", len(params) - 1)
    for key, kwargs in (("decoder", dict(decoder=Tag("auto"), size=Tag("x") and 64, train=True)),
                        ("transforms", dict(transforms=[RandomErasing(p=0.5)], size=64, train=True)),
                        ("size", dict(size=(64, 64), train=True))):
        kwargs.setdefault("batch_size", 4)
        kwargs["device"] = "cpu"
        modules, returns, stops = trace(kwargs, key, store)
        print(f"{key}: {len(modules)} stops, {returns} returns: {' -> '.join(m.removeprefix('feedline/').removesuffix('.py') for m in modules)}")
        if "-v" in sys.argv:
            for s in stops: print("   ", s)
