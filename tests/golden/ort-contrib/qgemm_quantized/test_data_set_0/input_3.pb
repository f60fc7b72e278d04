BBJ›ˆ r¶¨
ÿ0ÂAmÀ
°KaT