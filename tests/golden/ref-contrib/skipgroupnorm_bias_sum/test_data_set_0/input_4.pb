BbiasJ ğ$t¿W
1¿g!l?öª]?|½^ót?p„f¿ÕıB?