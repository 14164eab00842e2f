"""RL on mined tasks with textual-feedback KL: the config, the policies, the loop and its parts."""
