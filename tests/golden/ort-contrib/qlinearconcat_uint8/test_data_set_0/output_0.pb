BYJ
vÃ­YŒYQ=ô