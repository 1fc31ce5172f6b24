A = 2  # DDTREE
