BBJ›¶ÿm°ˆ¨0ÀK Â
ar
AT