"""The Llama-family decoder: its shapes and parameters (`llama`), attention kernels (`attention`) and
the loss (`loss`). Pure functions of arrays: no optimizer, mesh, precision policy or data here, so
peft/, quant/, precision/ and training/ all build on it."""
