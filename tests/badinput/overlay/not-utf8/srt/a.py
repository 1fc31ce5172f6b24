A = 1
ÿþ not utf-8
