BoutputJ
h<š8Å@¼¼‰ï