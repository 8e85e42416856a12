"""A module only test_zygote.py's preload test imports: whether a zygote's child has it says whether
the zygote imported it."""
