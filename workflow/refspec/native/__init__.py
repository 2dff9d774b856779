"""The native layer: the pinned, patched llama.cpp build (``build``), the ctypes runtime
over its libraries (``runtime``) and the model files it loads (``models``)."""
