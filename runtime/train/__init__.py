"""Models, training loops, evaluation and checkpoints of the trainers."""
