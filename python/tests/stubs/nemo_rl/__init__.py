"""eerl's stand-in of NeMo-RL (tests only; not NeMo-RL). README.md beside this file says which
upstream revision each interface follows; nemo_rl._standin.select() switches between them."""

__version__ = "0.6.0+7ea279a"  # main at 7ea279a until nemo_rl._standin.select() says otherwise
