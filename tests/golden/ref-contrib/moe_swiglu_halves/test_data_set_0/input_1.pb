Brouter_probsJ<k¿eG¿9Ê¿uÀ>»wôØ?z¢½?Š
í?W“I¿°¢·¿OA‘?‘ÓÆ?î9{¿fB€¿!É°=…Ôú¿