BinputJ
h<š8Å@¼¼‰ï