# Numerical replay (E1) of captured attention operands.
