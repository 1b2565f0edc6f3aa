//! Reading and writing tensors as `.npy` files, so numpy users can check results.
