"""Convert a GGUF file to OpenVINO IR with OpenVINO GenAI's GGUF reader (``anc/openvino.md``).

Run by :func:`refspec.engines.openvino.env.ensure_ir` with the engine's interpreter, as a file
(``python -I openvino_convert.py --gguf FILE --out FOLDER``); it imports the standard library and
``openvino_genai`` only. The engine builds an OpenVINO model from the GGUF and saves it
(``enable_save_ov_model``) beside the file it read, so the GGUF is linked into a fresh folder,
converted there, the link removed and the folder renamed into place. One conversion per process:
the IR's node names come from process-wide counters, so a fresh process makes the IR
byte-reproducible (the same GGUF and engine give the same sha256 of every file).
"""

from __future__ import annotations

import argparse  # contract: a program of its own, run by the engine's interpreter
import json
import os
import shutil
import sys
import time

CONVERSION_FILES = (
    "openvino_model.xml",
    "openvino_model.bin",
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
)


def engine_version() -> str:
    import openvino_genai

    return str(getattr(openvino_genai, "__version__", None) or openvino_genai.get_version())


def convert(gguf: str, out: str) -> int:
    import openvino_genai as ov

    tmp = out + f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    link = os.path.join(tmp, os.path.basename(gguf))
    os.symlink(os.path.abspath(gguf), link)
    t0 = time.monotonic()
    ov.LLMPipeline(link, "CPU", enable_save_ov_model=True)
    os.unlink(link)
    missing = [f for f in CONVERSION_FILES if not os.path.isfile(os.path.join(tmp, f))]
    if missing:
        print(f"conversion of {gguf} left no {', '.join(missing)}", file=sys.stderr)  # contract: its own program
        return 5
    rec = {"gguf": os.path.abspath(gguf), "engine": engine_version(), "seconds": round(time.monotonic() - t0, 2)}
    with open(os.path.join(tmp, "conversion.json"), "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    os.replace(tmp, out)
    print(json.dumps(rec, sort_keys=True))  # contract: its own program's output
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gguf", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    return convert(a.gguf, a.out)


if __name__ == "__main__":
    sys.exit(main())
