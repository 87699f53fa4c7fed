"""What is planned: the order, the crops and flips, each batch's plan, the size per epoch, the
loader's seed and where a run stands. Pure functions of (seed, epoch, index)."""
