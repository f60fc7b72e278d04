ByJH?-;e?IVu^uR|Z6-|fpuf]E|``^|fà^Wf:HI4zqh901k
Hw-
dw/?_omML-|aY-|qYr