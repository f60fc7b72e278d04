2Hello, World! a bc2x y2
no-1 yes22BX