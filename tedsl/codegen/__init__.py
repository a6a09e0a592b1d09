"""Code generation: loop IR -> LLVM IR (CPU) and CUDA C (GPU)."""
