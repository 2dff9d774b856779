"""refspec: reproducible benchmarking of reference-preserving speculative decoding."""

__version__ = "0.1.0"
